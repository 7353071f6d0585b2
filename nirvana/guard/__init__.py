"""Limits and protection: input safety, memory planning, one heavy job per device."""
