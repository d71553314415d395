#include <iostream>

#include "lmcfs_tools.h"

int main(int argc, char** argv) { return lmc::tools::GcMain(argc, argv, std::cout, std::cerr); }
