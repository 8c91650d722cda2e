// Least-squares fit of (α, 1/B) to measured collective times.
//
// Each sample i gives one row  t_i ≈ a_i·α + b_i·β  with β = 1/B and (a_i, b_i) = collective_terms(...). The
// columns differ by ~10 orders of magnitude (a_i ~ 10, b_i ~ 10^9 bytes), so the normal equations would square
// an already poor conditioning; a two-column QR (Gram–Schmidt, orthogonalised twice) does not care about column
// scales and recovers noiseless α and B to rounding.
#include "dptrain/cost/fit.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "dptrain/core/error.hpp"

namespace dptrain::cost {
namespace {

double dot(const std::vector<double>& x, const std::vector<double>& y) {
  double sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) sum += x[i] * y[i];
  return sum;
}

// x -= factor·y
void subtract_scaled(std::vector<double>& x, double factor, const std::vector<double>& y) {
  for (std::size_t i = 0; i < x.size(); ++i) x[i] -= factor * y[i];
}

}  // namespace

LinkFit fit_alpha_beta(std::span<const TimingSample> samples, FitWeighting weighting) {
  require(samples.size() >= 2, "α–β fit needs at least 2 timing samples, got {}", samples.size());
  const std::size_t count = samples.size();
  std::vector<double> alpha_column(count), beta_column(count), target(count);  // weighted rows [count]
  std::vector<AlphaBetaTerms> terms(count);
  for (std::size_t i = 0; i < count; ++i) {
    const TimingSample& s = samples[i];
    require(s.ranks >= 1, "α–β fit: sample {} has {} ranks", i, s.ranks);
    require(s.bytes >= 0 && std::isfinite(s.bytes), "α–β fit: sample {} has {} bytes", i, s.bytes);
    require(s.seconds > 0 && std::isfinite(s.seconds), "α–β fit: sample {} has time {} s; must be positive", i,
            s.seconds);
    terms[i] = collective_terms(s.kind, s.ranks, s.bytes);
    const double weight = weighting == FitWeighting::relative ? 1 / s.seconds : 1.0;
    alpha_column[i] = weight * terms[i].alpha_count;
    beta_column[i] = weight * terms[i].bandwidth_bytes;
    target[i] = weight * s.seconds;
  }

  const double r11 = std::sqrt(dot(alpha_column, alpha_column));
  const double beta_norm = std::sqrt(dot(beta_column, beta_column));
  require(r11 > 0, "α–β fit: no sample pays α (all on one rank?): α is undetermined");
  require(beta_norm > 0, "α–β fit: no sample moves bytes: the bandwidth is undetermined");

  std::vector<double> q1 = alpha_column;
  for (double& x : q1) x /= r11;
  std::vector<double> q2 = beta_column;
  double r12 = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass removes what rounding left of q1 in q2
    const double projection = dot(q1, q2);
    subtract_scaled(q2, projection, q1);
    r12 += projection;
  }
  const double r22 = std::sqrt(dot(q2, q2));
  require(r22 > 1e-9 * beta_norm,
          "α–β fit: the samples cannot separate α from bandwidth (one message size per rank count?); measure "
          "at least two sizes");
  for (double& x : q2) x /= r22;

  LinkFit fit;
  double beta = dot(q2, target) / r22;  // seconds per byte
  double alpha = (dot(q1, target) - r12 * beta) / r11;
  if (alpha < 0) {
    // A latency cannot be negative: the best fit with α ≥ 0 then lies on α = 0.
    alpha = 0;
    beta = dot(beta_column, target) / (beta_norm * beta_norm);
    fit.alpha_clamped = true;
  }
  require(beta > 0,
          "α–β fit: measured times do not grow with message size (fitted 1/B = {:g} s/B): the sizes are too small "
          "or too noisy to show the bandwidth; measure larger messages",
          beta);
  fit.link = Link{.alpha_s = alpha, .bandwidth_Bps = 1 / beta};
  fit.samples = static_cast<int>(count);

  double sum_squares = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double residual = terms[i].alpha_count * alpha + terms[i].bandwidth_bytes * beta - samples[i].seconds;
    sum_squares += residual * residual;
    fit.max_abs_residual_s = std::max(fit.max_abs_residual_s, std::abs(residual));
    fit.max_relative_residual = std::max(fit.max_relative_residual, std::abs(residual) / samples[i].seconds);
  }
  fit.rms_residual_s = std::sqrt(sum_squares / count);
  return fit;
}

namespace {

// Least squares on k columns by modified Gram–Schmidt, each column orthogonalised twice, as above. Returns the
// coefficients, or nothing when a column is (numerically) a combination of the earlier ones.
std::optional<std::vector<double>> least_squares(std::vector<std::vector<double>> columns,
                                                 const std::vector<double>& target) {
  const std::size_t k = columns.size();
  std::vector<std::vector<double>> r(k, std::vector<double>(k, 0.0));
  for (std::size_t j = 0; j < k; ++j) {
    const double norm = std::sqrt(dot(columns[j], columns[j]));
    if (!(norm > 0)) return std::nullopt;
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t i = 0; i < j; ++i) {
        const double projection = dot(columns[i], columns[j]);
        subtract_scaled(columns[j], projection, columns[i]);
        r[i][j] += projection;
      }
    }
    r[j][j] = std::sqrt(dot(columns[j], columns[j]));
    if (r[j][j] <= 1e-9 * norm) return std::nullopt;
    for (double& x : columns[j]) x /= r[j][j];
  }
  std::vector<double> coefficients(k);
  for (std::size_t j = k; j-- > 0;) {
    double sum = dot(columns[j], target);
    for (std::size_t i = j + 1; i < k; ++i) sum -= r[j][i] * coefficients[i];
    coefficients[j] = sum / r[j][j];
  }
  return coefficients;
}

}  // namespace

LinkGammaFit fit_alpha_beta_gamma(std::span<const TimingSample> samples, FitWeighting weighting) {
  LinkGammaFit result{.fit = fit_alpha_beta(samples, weighting)};  // validates the samples; the fallback
  const std::size_t count = samples.size();
  std::vector<std::vector<double>> columns(3, std::vector<double>(count));  // α, β, γ, weighted [3][count]
  std::vector<double> target(count);
  std::vector<AlphaBetaTerms> terms(count);
  for (std::size_t i = 0; i < count; ++i) {
    terms[i] = collective_terms(samples[i].kind, samples[i].ranks, samples[i].bytes);
    const double weight = weighting == FitWeighting::relative ? 1 / samples[i].seconds : 1.0;
    columns[0][i] = weight * terms[i].alpha_count;
    columns[1][i] = weight * terms[i].bandwidth_bytes;
    columns[2][i] = weight * terms[i].reduced_bytes;
    target[i] = weight * samples[i].seconds;
  }
  std::optional<std::vector<double>> solved = least_squares(columns, target);
  if (!solved) return result;  // γ undetermined: one kind of collective, or none that adds
  bool alpha_clamped = false;
  if ((*solved)[0] < 0) {  // as fit_alpha_beta: a latency cannot be negative, refit on α = 0
    solved = least_squares({columns[1], columns[2]}, target);
    if (!solved) return result;
    solved->insert(solved->begin(), 0.0);
    alpha_clamped = true;
  }
  const double alpha = (*solved)[0], beta = (*solved)[1], gamma = (*solved)[2];
  if (!(gamma >= 0) || !(beta > 0)) return result;  // adding cannot save time: keep the α–β fit
  LinkFit& fit = result.fit;
  fit.link = Link{.alpha_s = alpha, .bandwidth_Bps = 1 / beta, .gamma_s_per_byte = gamma};
  fit.alpha_clamped = alpha_clamped;
  fit.rms_residual_s = fit.max_abs_residual_s = fit.max_relative_residual = 0;
  double sum_squares = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const double residual = terms[i].seconds(fit.link) - samples[i].seconds;
    sum_squares += residual * residual;
    fit.max_abs_residual_s = std::max(fit.max_abs_residual_s, std::abs(residual));
    fit.max_relative_residual = std::max(fit.max_relative_residual, std::abs(residual) / samples[i].seconds);
  }
  fit.rms_residual_s = std::sqrt(sum_squares / count);
  result.gamma_fitted = true;
  return result;
}

}  // namespace dptrain::cost
