# The R package dppca's score map (frame + additive histogram) on given scores, for
# benchmarks/bench_score_map.py --r-package: its own dp_frame (smooth-sensitivity
# medians with the data's own range, UQ radius, square frame, inflation 0.2) and
# score_histograms ("add": classical Gaussian constant, clamping), at the same total
# score-map budget split as the package splits it (frame half, histogram half).
# Usage: Rscript r_score_map.R PACKAGE_DIR scores.csv EPS DELTA RUNS
# Prints one line per run: "TV coverage".
args <- commandArgs(trailingOnly = TRUE)
source(file.path(args[1], "R", "score_helpers.R"))
source(file.path(args[1], "R", "scree_methods.R"))
X <- as.matrix(read.csv(args[2], header = FALSE))
eps <- as.numeric(args[3]); delta <- as.numeric(args[4]); runs <- as.integer(args[5])
for (r in seq_len(runs)) {
  frame <- dp_frame(X, eps / 2, delta / 2)
  grid <- score_histogram_grid(frame$xlim, frame$ylim, 10L, 10L)
  h <- score_histograms_from_grid(X, grid, eps / 2, delta / 2, "add", NULL)
  tv <- 0.5 * sum(abs(h$add$prob - h$nonprivate$prob))
  inside <- X[, 1] >= frame$xlim[1] & X[, 1] <= frame$xlim[2] &
    X[, 2] >= frame$ylim[1] & X[, 2] <= frame$ylim[2]
  cat(tv, mean(inside), "\n")
}
