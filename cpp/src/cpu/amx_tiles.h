// SPDX-License-Identifier: MIT
// cpu/amx_tiles.h: the tile configuration of the AMX kernels and the scope
// that loads it. Include only from files compiled with -mamx-tile (and the
// AVX-512 flags): everything here is in an unnamed namespace, one copy per
// file (see epilogue_rows.h on why).
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

// The tiles configured as `config` for the scope's life. The tiles hold
// nothing between a kernel's calls. The caller's configuration is kept
// (sttilecfg) and put back on exit, or, where there was none, the tile state
// is released, so that a thread that has let go of the tiles does not make
// the OS save 8 KB of tile data at each switch: other AMX code on the thread
// (ggml's, for one, configures its tiles once a thread) finds the tiles as
// it left them, less their data. GCC's _tile_loadconfig and
// _tile_storeconfig (GCC 11 and 12, as inline asm; later versions use
// builtins) tell the compiler of 8 of the 64 bytes they read and write, so
// at -O3 it drops stores into a local configuration that only
// ldtilecfg reads (which then loads what the stack held, and the first tile
// instruction faults): `config` must be a static object, its bytes in the
// image, and the caller's is kept in a plain byte array that only sttilecfg
// fills.
class TileScope {
 public:
  explicit TileScope(const TileConfig& config) {
    _tile_storeconfig(callers_);
    _tile_loadconfig(&config);
  }
  ~TileScope() {
    if (callers_[0] != 0)  // palette 0: the tiles were not configured
      _tile_loadconfig(callers_);
    else
      _tile_release();
  }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;

 private:
  alignas(64) uint8_t callers_[64];
};

// A compiler barrier for memory that tile instructions read or write: GCC's
// _tile_loadd has no memory clobber, and whether _tile_stored has one
// depends on the header's version. Put after a tile store whose bytes vector
// code then reads, and before a tile load of bytes vector code wrote.
inline void tile_memory_fence() { asm volatile("" ::: "memory"); }

}  // namespace
}  // namespace qg::detail::cpu
