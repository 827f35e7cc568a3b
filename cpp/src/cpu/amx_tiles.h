// SPDX-License-Identifier: MIT
// cpu/amx_tiles.h: the tile configuration of the AMX kernels and the
// thread's state that keeps it for a task. Include only from files compiled
// with -mamx-tile (and the AVX-512 flags): everything here is in an unnamed
// namespace, one copy per file (see epilogue_rows.h on why).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace qg::detail::cpu {
namespace {

// ldtilecfg's 64-byte operand: palette 1, then per tile its bytes a row and
// its rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

// The tile configuration of a thread's AMX calls. A call asks for its
// configuration (`use`), which is loaded only where the thread holds another
// or none, and the driver gives it back once a task's calls are done
// (`end_task`, through the kernel table's end_task and EndOfTask in
// kernels.h): the thread's earlier configuration is put back (sttilecfg
// kept it at the first `use`), or, where there was none, the tile state is
// released, so that a thread that has let go of the tiles does not make the
// OS save 8 KB of tile data at each switch, and other AMX code on the thread
// (ggml's, for one, configures its tiles once a thread) finds the tiles as
// it left them, less their data. Per call (sttilecfg, ldtilecfg and the
// restore around every panel pass) it cost 6-11 % of the Q4_0 GEMM at N = 64,
// K = 4096 on a Sapphire Rapids class VM, whose 896 panels x 4 A groups make
// 3584 passes a call (bench/RESULTS.md). GCC's _tile_loadconfig and
// _tile_storeconfig (GCC 11 and 12, as inline asm; later versions use
// builtins) tell the compiler of 8 of the 64 bytes they read and write, so
// at -O3 it drops stores into a local configuration that only ldtilecfg
// reads (which then loads what the stack held, and the first tile
// instruction faults): `config` must be a static object, its bytes in the
// image (its address also names it here), and the caller's is kept in a
// plain byte array that only sttilecfg fills. One state a thread and file
// (the unnamed namespace): each AMX file's table gives back its own.
class ThreadTiles {
 public:
  static void use(const TileConfig& config) {
    State& s = state();
    if (s.loaded == &config) return;
    if (s.loaded == nullptr) _tile_storeconfig(s.callers);
    _tile_loadconfig(&config);
    s.loaded = &config;
  }
  static void end_task() {
    State& s = state();
    if (s.loaded == nullptr) return;
    if (s.callers[0] != 0)  // palette 0: the tiles were not configured
      _tile_loadconfig(s.callers);
    else
      _tile_release();
    s.loaded = nullptr;
  }

 private:
  struct State {
    const TileConfig* loaded = nullptr;
    alignas(64) uint8_t callers[64] = {};  // constant-initialised: no guard on each use
  };
  static State& state() {
    static thread_local State s;
    return s;
  }
};

// A compiler barrier for memory that tile instructions read or write: GCC's
// _tile_loadd has no memory clobber, and whether _tile_stored has one
// depends on the header's version. Put after a tile store whose bytes vector
// code then reads, and before a tile load of bytes vector code wrote.
inline void tile_memory_fence() { asm volatile("" ::: "memory"); }

}  // namespace
}  // namespace qg::detail::cpu
