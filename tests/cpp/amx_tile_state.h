// SPDX-License-Identifier: MIT
// amx_tile_state.h: the calling thread's AMX tile configuration around a
// kernel call. qg's AMX kernels keep a configuration for a task's calls and
// give it back at the task's end (cpu/amx_tiles.h): AMX code that configures
// a thread's tiles once and keeps them (ggml does) must find its
// configuration after a qg call, and a thread without one must be left
// without one. Only where the compiler has the tile intrinsics.
#pragma once

#if defined(QG_TEST_AMX_INTRINSICS) && defined(__x86_64__)
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cstdint>
#include <vector>

namespace qgtest {

[[gnu::target("amx-tile")]] inline void load_tile_config(const uint8_t* config) { _tile_loadconfig(config); }
[[gnu::target("amx-tile")]] inline void store_tile_config(uint8_t* config) { _tile_storeconfig(config); }
[[gnu::target("amx-tile")]] inline void release_tiles() { _tile_release(); }

// A configuration of the caller's own: tile 0 3 x 12 bytes, tile 7 16 x 64
// (palette 1; colsb[0] and colsb[7] at bytes 16 and 30, rows[0] and rows[7]
// at 48 and 55). In static storage: see cpu/amx_tiles.h on configurations
// that only ldtilecfg reads.
alignas(64) inline constexpr uint8_t kCallersTileConfig[64] = {
    1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 0, 0, 0,  0, 0, 0, 0, 0, 0, 0, 64, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3,  0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0,  0};

// Runs `call` (which runs an AMX kernel on this thread) with the caller's
// configuration loaded, expecting it back afterwards, then with the tiles
// released, expecting none afterwards.
template <class Call>
void expect_callers_tiles_kept(Call&& call) {
  load_tile_config(kCallersTileConfig);
  call();
  alignas(64) uint8_t after[64];
  store_tile_config(after);
  EXPECT_EQ(std::vector<uint8_t>(kCallersTileConfig, kCallersTileConfig + 64), std::vector<uint8_t>(after, after + 64))
      << "the caller's tile configuration was not put back";
  release_tiles();
  call();
  store_tile_config(after);
  EXPECT_EQ(after[0], 0) << "palette " << int{after[0]} << " left configured";
}

}  // namespace qgtest
#endif
