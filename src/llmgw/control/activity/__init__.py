"""What the routers saw: demand, use, requests in flight, engine gauges and request stats, and what is shared of
them with other servers."""
