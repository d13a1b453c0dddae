"""Training: episodes to datasets, the embedded tiny model, SFT and RL through TRL."""
