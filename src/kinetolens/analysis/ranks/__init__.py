"""Many ranks: collectives, the cross-rank step spread and stragglers."""
