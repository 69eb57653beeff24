#include "lithe/host/jobs/output_agreement.h"

#include <algorithm>

#include "lithe/sdk/error.h"

namespace lithe::host {

void OutputAgreement::add(const at::Tensor& got, const at::Tensor& want, const char* what,
                          const char* reference) {
  LITHE_CHECK(want.sizes() == got.sizes(), sdk::Errc::kUnsupported, "the ", what,
              " output has shape ", got.sizes(), ", the ", reference, "'s ", want.sizes());
  LITHE_CHECK(got.isfinite().all().item<bool>(), sdk::Errc::kUnsupported, "the ", what,
              " output holds NaN or infinite values; the certificate compares finite outputs");
  LITHE_CHECK(want.isfinite().all().item<bool>(), sdk::Errc::kUnsupported, "the ", reference,
              "'s output holds NaN or infinite values; the certificate compares finite outputs");
  max_abs = std::max(max_abs, (got - want).abs().max().item<double>());
  reference_max = std::max(reference_max, want.abs().max().item<double>());
  differing += got.ne(want).sum().item<int64_t>();
  values += want.numel();
  if (want.dim() == 2) {
    agree += got.argmax(1).eq(want.argmax(1)).sum().item<int64_t>();
    rows += want.size(0);
  }
}

}  // namespace lithe::host
