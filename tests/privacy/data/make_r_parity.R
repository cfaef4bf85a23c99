# Reference outputs of the R package dppca's deterministic score-map helpers
# (R/score_helpers.R at github.com/yejinjo0220/dppca, commit b43ece9), for
# tests/privacy/test_r_parity.py.  Run from a checkout of that package:
#   Rscript make_r_parity.R R/score_helpers.R points.csv inside.csv
# (the outputs, with the points, are stored in r_score_parity.json).
# points.csv / inside.csv: the test's points (all, and those inside the frame).
args <- commandArgs(trailingOnly = TRUE)
source(args[1])
xlim <- c(-2, 3); ylim <- c(-1.5, 1); bins <- c(5L, 4L)
grid <- score_histogram_grid(xlim, ylim, bins[1], bins[2])
counts_of <- function(path) {
  X <- as.matrix(read.csv(path, header = FALSE))
  h <- score_histograms_from_grid(X, grid, 1, 1e-5, "add", NULL)
  round(h$nonprivate$prob * nrow(X))
}
options(digits = 17)
cat("x_breaks", sprintf("%.17g", grid$x_breaks), "\n")
cat("y_breaks", sprintf("%.17g", grid$y_breaks), "\n")
cat("clamped", counts_of(args[2]), "\n")
cat("inside", counts_of(args[3]), "\n")
cat("allocate_1", allocate_group_sample_sizes(c(a = 1, b = 1, c = 1), 10), "\n")
cat("allocate_2", allocate_group_sample_sizes(c(a = 2, b = 0.5, c = 3), 5), "\n")
cat("allocate_3", allocate_group_sample_sizes(c(a = 10, b = 20, c = 30, d = 40), 7), "\n")
