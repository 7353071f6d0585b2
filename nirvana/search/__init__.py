"""Searches over the method's choices: KL-guided calibration, gamma."""
