// A slow disk for the chaos tests, as an LD_PRELOAD shim: fsync and fdatasync each take
// GANTRY_SLOW_FSYNC_MS (default 30) longer than the real call. The first delayed call
// says so on stderr, so a test can check the shim was in force.
#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

namespace {

void Delay(const char* what) {
  static const long ms = [] {
    const char* v = std::getenv("GANTRY_SLOW_FSYNC_MS");
    return v && *v ? std::atol(v) : 30L;
  }();
  static bool said = false;
  if (!said) {
    said = true;
    std::fprintf(stderr, "slow_fsync: each %s (and fsync/fdatasync) delayed by %ld ms\n", what, ms);
  }
  timespec ts{ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, nullptr);
}

template <typename Fn>
Fn Real(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

}  // namespace

extern "C" int fsync(int fd) {
  static auto real = Real<int (*)(int)>("fsync");
  Delay("fsync");
  return real(fd);
}

extern "C" int fdatasync(int fd) {
  static auto real = Real<int (*)(int)>("fdatasync");
  Delay("fdatasync");
  return real(fd);
}
