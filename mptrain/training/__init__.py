"""Training: the step (custom loop) or Model.fit, observed by one `TrainingMonitor`."""
