"""GPU-hour usage: the accounting of held GPU time, the usage reports, and the one CSV writer."""
