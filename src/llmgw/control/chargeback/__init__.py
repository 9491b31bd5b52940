"""GPU time charged per key: the leader's accountant, the charge book the views read, GPU time beside usage."""
