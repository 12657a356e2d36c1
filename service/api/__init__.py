"""HTTP API: one router module per area."""
