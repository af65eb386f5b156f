"""``batchgw``: the gateway's batch API from a terminal, over its public HTTP API only."""
