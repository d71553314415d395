#include <cstdio>
int main() {
  std::fprintf(stderr, "lmc: not built yet\n");
  return 1;
}
