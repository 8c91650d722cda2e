// α–β fit: the link (α, B) that best explains measured collective times, by linear least squares on
// t = alpha_count·α + bandwidth_bytes·(1/B) with each sample's coefficients from collectives.hpp (e.g. ring
// all-reduce: 2(p−1) and 2(p−1)/p·n). Samples may mix collective kinds and rank counts. Reading and writing
// link.json belongs to the apps.
#pragma once
#include <span>

#include "dptrain/cost/collectives.hpp"
#include "dptrain/cost/link.hpp"

namespace dptrain::cost {

struct TimingSample {
  Collective kind;
  int ranks;       // p
  double bytes;    // n: the message size the collective was called with (M, or P for piece_all_gather)
  double seconds;  // t: measured time of one call
};

enum class FitWeighting {
  absolute,  // minimise Σ (t̂ − t)²: the plain least squares of docs/systems-model.md
  relative,  // minimise Σ ((t̂ − t)/t)²: every size counts alike, so α is not drowned by the largest messages
};

struct LinkFit {
  Link link;
  int samples = 0;
  double rms_residual_s = 0;         // sqrt(mean (t̂ − t)²)
  double max_abs_residual_s = 0;     // max |t̂ − t|
  double max_relative_residual = 0;  // max |t̂ − t| / t
  bool alpha_clamped = false;        // the unconstrained α came out negative: refitted with α = 0
};

// Throws UserError when the samples cannot determine a link: fewer than two, a non-positive time, only one
// distinct alpha/bandwidth ratio (e.g. one message size at one p), or times that do not grow with bytes.
LinkFit fit_alpha_beta(std::span<const TimingSample> samples, FitWeighting weighting = FitWeighting::absolute);

// α, β and γ together: t = alpha_count·α + bandwidth_bytes·β + reduced_bytes·γ (collectives.hpp), least squares on
// all three. γ is determined only when the samples' reduced bytes are not proportional to their bandwidth bytes:
// one collective kind alone cannot tell adding from sending (a ring all-reduce adds half of what it sends), so the
// sweep must mix collectives that add (all-reduce, reduce-scatter) with one that does not (all-gather). Where it
// is not determined (gamma_fitted = false), or comes out negative, the result is fit_alpha_beta's with γ = 0.
struct LinkGammaFit {
  LinkFit fit;               // fit.link.gamma_s_per_byte holds γ
  bool gamma_fitted = false;
};
LinkGammaFit fit_alpha_beta_gamma(std::span<const TimingSample> samples,
                                  FitWeighting weighting = FitWeighting::absolute);

}  // namespace dptrain::cost
