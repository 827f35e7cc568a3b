// SPDX-License-Identifier: MIT
// repack_q4_0x16.cpp: q4_0 rows <-> q4_0x16 groups of 16 rows (formats.h),
// a byte copy through x16_get_row / x16_put_row, one pool task per 16 groups.
// A load-time step (a model's weights once), so plain scalar copies: at K =
// 14336 a group is 126 KB and moves at memory speed either way.
#include "cpu/kernels.h"
#include "cpu/q4_0x16_rows.h"
#include "cpu/thread_pool.h"

#include <cstring>

namespace qg::detail::cpu {

void repack_rows(const RepackArgs& a) {
  const int64_t groups = a.rows / kQ4_0x16Rows, nb = a.k / kQK4_0;
  const bool to_x16 = a.to == Format::q4_0x16;
  const auto* x = static_cast<const uint8_t*>(a.x);
  auto* y = static_cast<uint8_t*>(a.y);
  constexpr int64_t kGroupsPerTask = 16;
  run_tiles((groups + kGroupsPerTask - 1) / kGroupsPerTask, a.rows * a.k, [&](int64_t t) {
    for (int64_t g = t * kGroupsPerTask; g < groups && g < (t + 1) * kGroupsPerTask; ++g)
      for (int r = 0; r < kQ4_0x16Rows; ++r) {
        const int64_t row = g * kQ4_0x16Rows + r;
        for (int64_t b = 0; b < nb; ++b) {
          block_q4_0 blk;
          if (to_x16) {
            std::memcpy(&blk, x + row * a.x_row_stride + b * int64_t{sizeof(block_q4_0)}, sizeof blk);
            x16_put_row(blk, r, y + g * a.y_row_stride + b * kX16Bytes);
          } else {
            x16_get_row(x + g * a.x_row_stride + b * kX16Bytes, r, &blk);
            std::memcpy(y + row * a.y_row_stride + b * int64_t{sizeof(block_q4_0)}, &blk, sizeof blk);
          }
        }
      }
  });
}

}  // namespace qg::detail::cpu
