// Op schemas (the one TORCH_LIBRARY block) and the CPU implementations.
//
// The CPU ops run the same scalar code as the GPU kernels (sb_numeric.h), parallel over
// (batch, head), so a CPU-only machine builds, imports and checks the extension.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>
#include <tuple>

#include "ops_common.h"

namespace sagebuild {
namespace {

at::Tensor k_mean_cpu(const at::Tensor& k) {
  check_bhnd(k, "k");
  const View4 v = view_of(k);
  const int64_t BH = k.size(0) * k.size(1);
  at::Tensor out = at::empty({k.size(0), k.size(1), 1, k.size(3)}, k.options().dtype(at::kFloat));
  float* o = out.data_ptr<float>();
  dispatch_storage(k, [&](auto tag) {
    using T = decltype(tag);
    const auto* x = data_of<T>(k);
    at::parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bh = lo; bh < hi; ++bh) {
        float* row = o + bh * v.D;
        std::fill(row, row + v.D, 0.0f);
        for (int n = 0; n < v.N; ++n)
          for (int d = 0; d < v.D; ++d) row[d] += T::load(x[offset(v, static_cast<int>(bh), n, d)]);
        for (int d = 0; d < v.D; ++d) row[d] = finite_or_zero(row[d] / static_cast<float>(v.N));
      }
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> quant_per_block_int8_cpu(const at::Tensor& x_in,
                                                            const std::optional<at::Tensor>& km_in,
                                                            int64_t blk, double scale_mul) {
  check_bhnd(x_in, "x");
  TORCH_CHECK(blk > 0, "sagebuild: blk must be positive, got ", blk);
  const View4 v = view_of(x_in);
  const int64_t BH = x_in.size(0) * x_in.size(1);
  const int nblk = cdiv(v.N, static_cast<int>(blk));
  at::Tensor km;
  if (km_in.has_value()) km = check_km(x_in, *km_in);
  const float* kmp = km.defined() ? km.data_ptr<float>() : nullptr;
  at::Tensor out = at::empty({x_in.size(0), x_in.size(1), v.N, v.D}, x_in.options().dtype(at::kChar));
  at::Tensor scale = at::empty({x_in.size(0), x_in.size(1), nblk}, x_in.options().dtype(at::kFloat));
  int8_t* o = out.data_ptr<int8_t>();
  float* s = scale.data_ptr<float>();
  const float mul = static_cast<float>(scale_mul);
  dispatch_storage(x_in, [&](auto tag) {
    using T = decltype(tag);
    const auto* x = data_of<T>(x_in);
    at::parallel_for(0, BH * nblk, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t job = lo; job < hi; ++job) {
        const int bh = static_cast<int>(job / nblk);
        const int ib = static_cast<int>(job % nblk);
        const int n0 = ib * static_cast<int>(blk);
        const int n1 = std::min(v.N, n0 + static_cast<int>(blk));
        const float* kmrow = kmp ? kmp + static_cast<int64_t>(bh) * v.D : nullptr;
        auto y_at = [&](int n, int d) {  // x - km at (n, d)
          const float y = T::load(x[offset(v, bh, n, d)]);
          return kmrow ? y - kmrow[d] : y;
        };
        float amax = 0.0f;
        for (int n = n0; n < n1; ++n)
          for (int d = 0; d < v.D; ++d) amax = max_keep_nan(amax, fabsf(y_at(n, d)));
        const float step = scale_of(amax, kInt8Max);
        const float inv = recip(step);
        s[job] = step * mul;
        for (int n = n0; n < n1; ++n) {
          int8_t* dst = o + (static_cast<int64_t>(bh) * v.N + n) * v.D;
          for (int d = 0; d < v.D; ++d) dst[d] = quant_int8(y_at(n, d), inv);
        }
      }
    });
  });
  return {out, scale};
}

std::tuple<at::Tensor, at::Tensor> quant_v_fp8_per_channel_cpu(const at::Tensor& v_in, bool fnuz) {
  check_bhnd(v_in, "v");
  const View4 v = view_of(v_in);
  const int64_t BH = v_in.size(0) * v_in.size(1);
  // Channel-major codes: physical [B, H, D, N], returned as the logical [B, H, N, D] view.
  at::Tensor out = at::empty({v_in.size(0), v_in.size(1), v.D, v.N}, v_in.options().dtype(fp8_dtype(fnuz)));
  at::Tensor scale = at::empty({v_in.size(0), v_in.size(1), v.D}, v_in.options().dtype(at::kFloat));
  auto* o = reinterpret_cast<uint8_t*>(out.data_ptr());
  float* s = scale.data_ptr<float>();
  const float fmax = fnuz ? kFp8E4m3fnuzMax : kFp8E4m3fnMax;
  dispatch_storage(v_in, [&](auto tag) {
    using T = decltype(tag);
    const auto* x = data_of<T>(v_in);
    at::parallel_for(0, BH, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t bh = lo; bh < hi; ++bh) {
        float* srow = s + bh * v.D;
        std::fill(srow, srow + v.D, 0.0f);
        for (int n = 0; n < v.N; ++n)
          for (int d = 0; d < v.D; ++d)
            srow[d] = max_keep_nan(srow[d], fabsf(T::load(x[offset(v, static_cast<int>(bh), n, d)])));
        std::vector<float> inv(v.D);
        for (int d = 0; d < v.D; ++d) {
          srow[d] = scale_of(srow[d], fmax);
          inv[d] = recip(srow[d]);
        }
        uint8_t* oh = o + bh * v.D * v.N;
        for (int n = 0; n < v.N; ++n)
          for (int d = 0; d < v.D; ++d)
            oh[static_cast<int64_t>(d) * v.N + n] =
                float_to_e4m3(mul_rn(T::load(x[offset(v, static_cast<int>(bh), n, d)]), inv[d]), fnuz);
      }
    });
  });
  return {out.transpose(-1, -2), scale};
}

}  // namespace
}  // namespace sagebuild

TORCH_LIBRARY(sagebuild, m) {
  m.def("k_mean(Tensor k) -> Tensor");
  m.def("quant_per_block_int8(Tensor x, Tensor? km, int blk, float scale_mul) -> (Tensor, Tensor)");
  m.def("quant_v_fp8_per_channel(Tensor v, bool fnuz) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(sagebuild, CPU, m) {
  m.impl("k_mean", &sagebuild::k_mean_cpu);
  m.impl("quant_per_block_int8", &sagebuild::quant_per_block_int8_cpu);
  m.impl("quant_v_fp8_per_channel", &sagebuild::quant_v_fp8_per_channel_cpu);
}
