"""Who may use the cluster and what they used: API keys and revocations, every key's counters against its limits and
GPU budgets, usage totals."""
