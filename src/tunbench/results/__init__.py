"""Results: versioned, self-describing JSON per case plus a campaign index."""
