"""Training a policy: the loop (hfpolicy.training.loop), its set-up, progress, configuration, checkpoints and the
run folder they all write into."""
