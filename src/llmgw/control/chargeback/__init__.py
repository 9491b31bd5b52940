"""GPU time charged per key: the leader's chargeback, the charge book the views read, charges beside usage."""
