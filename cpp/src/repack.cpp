// SPDX-License-Identifier: MIT
// repack.cpp: qg::repack, one format's blocks moved into another layout of
// the same codes (q4_0 <-> q4_0x16). Checked here, then done on the host by
// cpu::repack_rows (cpu/repack_q4_0x16.cpp): a copy, no arithmetic, so it
// needs no kernel table.
#include <limits>
#include <string>
#include <tuple>

#include "cpu/kernels.h"
#include "validate.h"

namespace qg {

using detail::invalid;

namespace {

std::string num(int64_t v) { return std::to_string(v); }

bool is_pair(Format from, Format to) {
  return (from == Format::q4_0 && to == Format::q4_0x16) || (from == Format::q4_0x16 && to == Format::q4_0);
}

Status check_pair(const char* fn, Format from, Format to) {
  if (!is_pair(from, to))
    return invalid(fn, std::string("qg repacks q4_0 to q4_0x16 and back; got ") + format_traits(from).name +
                           " to " + format_traits(to).name);
  return {};
}

}  // namespace

Status repack(const RepackArgs& a) {
  const char* fn = a.fn ? a.fn : "qg.repack";
  if (Status s = check_pair(fn, a.from, a.to); !s.ok()) return s;
  if (a.device.type != DeviceType::cpu)
    return invalid(fn, std::string("q4_0x16 is the layout of qg's CPU kernels; the weight is on ") +
                           device_name(a.device) + ": repack it on the host (a CPU array)");
  const FormatTraits &tf = format_traits(a.from), &tt = format_traits(a.to);
  if (a.rows < 0 || a.k < 0) return invalid(fn, "rows and K must be >= 0 (got rows=" + num(a.rows) + ", K=" + num(a.k) + ")");
  if (a.k % kQK4_0 != 0) return invalid(fn, "K=" + num(a.k) + " is not a multiple of 32, the Q4_0 block size");
  if (a.rows % kQ4_0x16Rows != 0)
    return invalid(fn, num(a.rows) + " rows are not a multiple of 16, the rows of one q4_0x16 block; keep such a "
                       "weight in q4_0");
  if (a.rows == 0 || a.k == 0) return {};
  if (a.x == nullptr || a.y == nullptr) return invalid(fn, "x and y must not be null");
  const int64_t xb = row_bytes(tf, a.k), yb = row_bytes(tt, a.k);
  const int64_t xr = stored_rows(tf, a.rows), yr = stored_rows(tt, a.rows);
  if (xr > 1 && a.x_row_stride < xb)
    return invalid(fn, "x row stride " + num(a.x_row_stride) + " bytes is less than a row of " + tf.name +
                           " blocks (" + num(xb) + " bytes)");
  for (const auto& [stored, stride, what] : {std::tuple{xr, a.x_row_stride, "x"}, std::tuple{yr, a.y_row_stride, "y"}})
    if (stored > 1 && stride > 0 && stored - 1 > (std::numeric_limits<int64_t>::max() / 4) / stride)
      return Status(StatusCode::overflow, std::string(fn) + ": " + what + " of " + num(stored) + " stored rows, " +
                                              num(stride) + " bytes apart, is too large to address");
  if (yr > 1 && a.y_row_stride < yb)
    return invalid(fn, "y row stride " + num(a.y_row_stride) + " bytes is less than a row of " + tt.name +
                           " blocks (" + num(yb) + " bytes)");
  if (detail::overlaps(detail::span_of(a.x, xr, a.x_row_stride, xb), detail::span_of(a.y, yr, a.y_row_stride, yb)))
    return invalid(fn, "the output overlaps the input; pass a separate out array");
  detail::cpu::repack_rows(a);
  return {};
}

Status result_spec(const RepackViews& v, ResultSpec* out) {
  const char* fn = v.fn ? v.fn : "qg.repack";
  if (Status s = check_pair(fn, v.from, v.to); !s.ok()) return s;
  const char* arg = v.x_name ? v.x_name : "x";
  // check_packed_view also checks that the rows (leading dims x rows_per_block) are an int64.
  if (Status s = detail::check_packed_view(fn, arg, v.x, v.from); !s.ok()) return s;
  const FormatTraits &tf = format_traits(v.from), &tt = format_traits(v.to);
  int64_t rows = tf.rows_per_block;
  for (int d = 0; d < v.x.ndim - 2; ++d) rows *= v.x.shape[d];
  if (rows % tt.rows_per_block != 0)
    return invalid(fn, std::string(arg) + " holds " + num(rows) + " rows (shape " + detail::shape_string(v.x) +
                           "), not a multiple of 16, the rows of one q4_0x16 block; keep such a weight in q4_0");
  out->dtype = DType::u8;
  out->ndim = 3;
  out->shape[0] = rows / tt.rows_per_block;
  out->shape[1] = v.x.shape[v.x.ndim - 2];
  out->shape[2] = tt.bytes_per_block;
  return {};
}

Status repack(const RepackViews& v, const TensorView& out) {
  const char* fn = v.fn ? v.fn : "qg.repack";
  ResultSpec spec;
  if (Status s = result_spec(v, &spec); !s.ok()) return s;
  detail::RowLayout xl;
  if (Status s = detail::row_layout(fn, v.x_name ? v.x_name : "x", v.x, 2, &xl); !s.ok()) return s;
  if (Status s = detail::check_output(fn, out, spec, v.x.device); !s.ok()) return s;
  RepackArgs a;
  a.from = v.from;
  a.to = v.to;
  a.x = v.x.data;
  a.rows = spec.shape[0] * format_traits(v.to).rows_per_block;
  a.k = spec.shape[1] * kQK4_0;
  a.x_row_stride = xl.row_stride;
  a.y = out.data;
  a.y_row_stride = spec.shape[1] * spec.shape[2];
  a.device = v.x.device;
  a.fn = fn;
  return repack(a);
}

}  // namespace qg
