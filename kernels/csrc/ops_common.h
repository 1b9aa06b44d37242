// Input checks, views and dtype dispatch shared by the CPU and CUDA bindings (host code only).
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "sb_numeric.h"

namespace sagebuild {

inline void check_bhnd(const at::Tensor& x, const char* what) {
  TORCH_CHECK(x.dim() == 4, "sagebuild: ", what, " must be 4-D [B, H, N, D], got ", x.dim(), " dims");
  const auto st = x.scalar_type();
  TORCH_CHECK(st == at::kHalf || st == at::kBFloat16 || st == at::kFloat, "sagebuild: ", what,
              " must be float16, bfloat16 or float32, got ", st);
  TORCH_CHECK(x.size(2) > 0 && x.size(3) > 0, "sagebuild: ", what, " has an empty token or head dim");
  TORCH_CHECK(x.size(0) * x.size(1) <= 65535, "sagebuild: ", what, " has more than 65535 batch x heads");
  TORCH_CHECK(x.size(2) <= INT32_MAX / 2 && x.size(3) <= INT32_MAX / 2, "sagebuild: ", what, " is too large");
}

inline View4 view_of(const at::Tensor& x) {
  return {x.stride(0), x.stride(1), x.stride(2), x.stride(3), static_cast<int>(x.size(1)),
          static_cast<int>(x.size(2)), static_cast<int>(x.size(3))};
}

// km for x: float32 [B, H, 1, D] on x's device, made contiguous.
inline at::Tensor check_km(const at::Tensor& x, const at::Tensor& km) {
  TORCH_CHECK(km.device() == x.device(), "sagebuild: km must be on ", x.device(), ", got ", km.device());
  TORCH_CHECK(km.scalar_type() == at::kFloat, "sagebuild: km must be float32, got ", km.scalar_type());
  TORCH_CHECK(km.dim() == 4 && km.size(0) == x.size(0) && km.size(1) == x.size(1) && km.size(2) == 1 &&
                  km.size(3) == x.size(3),
              "sagebuild: km must be [B, H, 1, D] = [", x.size(0), ", ", x.size(1), ", 1, ", x.size(3),
              "], got ", km.sizes());
  return km.contiguous();
}

inline at::ScalarType fp8_dtype(bool fnuz) { return fnuz ? at::kFloat8_e4m3fnuz : at::kFloat8_e4m3fn; }

// Calls fn(Tag()) with the storage tag of x's dtype (check_bhnd admits only these three).
template <class Fn>
void dispatch_storage(const at::Tensor& x, Fn&& fn) {
  const auto st = x.scalar_type();
  if (st == at::kHalf)
    fn(F16());
  else if (st == at::kBFloat16)
    fn(BF16());
  else
    fn(F32());
}

// x's elements as the tag's raw storage type.
template <class T>
const typename T::storage* data_of(const at::Tensor& x) {
  return reinterpret_cast<const typename T::storage*>(x.const_data_ptr());
}

}  // namespace sagebuild
