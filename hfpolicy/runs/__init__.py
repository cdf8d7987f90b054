"""A training run's folder as training writes it and the rest of hfpolicy reads it: its layout and lock
(run_folder), metrics.jsonl (metrics_log), the training curve (curve) and the flattened config (hparams)."""
