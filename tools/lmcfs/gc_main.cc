#include <iostream>

#include "lmcfs_tools.h"

int main(int argc, char** argv) {
  lmc::tools::LogToStderr();
  return lmc::tools::GcMain(argc, argv, std::cout, std::cerr);
}
