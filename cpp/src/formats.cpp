// SPDX-License-Identifier: MIT
// formats.cpp: the format traits table.
#include "qg/formats.h"

namespace qg {

namespace {
constexpr FormatTraits kTraits[] = {
    {Format::q4_0, "q4_0", kQK4_0, sizeof(block_q4_0), 4, false},
    {Format::q8_0, "q8_0", kQK8_0, sizeof(block_q8_0), 8, false},
    {Format::q8_1, "q8_1", kQK8_1, sizeof(block_q8_1), 8, true},
};
}  // namespace

const FormatTraits& format_traits(Format format) { return kTraits[static_cast<int>(format)]; }

}  // namespace qg
