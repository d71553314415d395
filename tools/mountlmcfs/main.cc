#include "mount_main.h"

int main(int argc, char** argv) { return lmc::fs::MountMain(argc, argv); }
