"""What to change first: the recommendation rules and the findings they produce."""
