"""What operators read, computed from the owners' records and never by a writer: the summary, status, the dashboard,
the metrics and their exposition."""
