#include "cli.h"

int main(int argc, char** argv) { return lmc::cli::LmcMain(std::vector<std::string>(argv + 1, argv + argc)); }
