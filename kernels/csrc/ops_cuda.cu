// CUDA (and, through hipify, HIP) implementations of the ops: checks, allocation, launch.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "ops_common.h"
#include "quant_kernels.cuh"

namespace sagebuild {
namespace {

at::Tensor k_mean_cuda(const at::Tensor& k) {
  check_bhnd(k, "k");
  const c10::cuda::CUDAGuard guard(k.device());
  const View4 v = view_of(k);
  const int BH = static_cast<int>(k.size(0) * k.size(1));
  at::Tensor out = at::empty({k.size(0), k.size(1), 1, k.size(3)}, k.options().dtype(at::kFloat));
  at::Tensor work = at::empty({reduce_workspace_floats(v.N, v.D, BH)}, k.options().dtype(at::kFloat));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch_storage(k, [&](auto tag) {
    using T = decltype(tag);
    launch_k_mean<T>(data_of<T>(k), out.data_ptr<float>(), work.data_ptr<float>(), v, BH, stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

std::tuple<at::Tensor, at::Tensor> quant_per_block_int8_cuda(const at::Tensor& x,
                                                             const std::optional<at::Tensor>& km_in,
                                                             int64_t blk, double scale_mul) {
  check_bhnd(x, "x");
  TORCH_CHECK(blk > 0, "sagebuild: blk must be positive, got ", blk);
  const c10::cuda::CUDAGuard guard(x.device());
  const View4 v = view_of(x);
  const int BH = static_cast<int>(x.size(0) * x.size(1));
  const int nblk = cdiv(v.N, static_cast<int>(blk));
  at::Tensor km;
  if (km_in.has_value()) km = check_km(x, *km_in);
  at::Tensor out = at::empty({x.size(0), x.size(1), v.N, v.D}, x.options().dtype(at::kChar));
  at::Tensor scale = at::empty({x.size(0), x.size(1), nblk}, x.options().dtype(at::kFloat));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch_storage(x, [&](auto tag) {
    using T = decltype(tag);
    launch_quant_int8<T>(data_of<T>(x), km.defined() ? km.data_ptr<float>() : nullptr, out.data_ptr<int8_t>(),
                         scale.data_ptr<float>(), v, BH, static_cast<int>(blk), static_cast<float>(scale_mul),
                         stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out, scale};
}

std::tuple<at::Tensor, at::Tensor> quant_v_fp8_per_channel_cuda(const at::Tensor& vin, bool fnuz) {
  check_bhnd(vin, "v");
  const c10::cuda::CUDAGuard guard(vin.device());
  const View4 v = view_of(vin);
  const int BH = static_cast<int>(vin.size(0) * vin.size(1));
  // Channel-major codes: physical [B, H, D, N], returned as the logical [B, H, N, D] view.
  at::Tensor out = at::empty({vin.size(0), vin.size(1), v.D, v.N}, vin.options().dtype(fp8_dtype(fnuz)));
  at::Tensor scale = at::empty({vin.size(0), vin.size(1), v.D}, vin.options().dtype(at::kFloat));
  at::Tensor work = at::empty({reduce_workspace_floats(v.N, v.D, BH)}, vin.options().dtype(at::kFloat));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  dispatch_storage(vin, [&](auto tag) {
    using T = decltype(tag);
    launch_quant_v_fp8<T>(data_of<T>(vin), reinterpret_cast<uint8_t*>(out.data_ptr()), scale.data_ptr<float>(),
                          work.data_ptr<float>(), v, BH, fnuz, stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {out.transpose(-1, -2), scale};
}

}  // namespace
}  // namespace sagebuild

TORCH_LIBRARY_IMPL(sagebuild, CUDA, m) {
  m.impl("k_mean", &sagebuild::k_mean_cuda);
  m.impl("quant_per_block_int8", &sagebuild::quant_per_block_int8_cuda);
  m.impl("quant_v_fp8_per_channel", &sagebuild::quant_v_fp8_per_channel_cuda);
}
