"""txnwatch streaming sources (DESIGN §4)."""
