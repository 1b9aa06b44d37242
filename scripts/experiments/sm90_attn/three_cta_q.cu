// Experiment (scripts/experiments/sm90_attn): three_cta.cu with Q quantized inside the kernel from
// fp16 (quantize_q: the contract of quant.quant_blocks at 16 rows, under the first K/V loads), as
// the Triton kernel's prologue does: no Q launch and no INT8 Q round trip through memory.
#define Q_IN_KERNEL 1
#include "three_cta.cu"
