"""A training run's folder as training writes it and the rest of hfpolicy reads it (`hfpolicy push`, `hfpolicy view`,
loading a run's last policy):

    run_folder.py   RunFolder: the folder's layout and the lock its run holds
    metrics_log.py  metrics.jsonl, the log entries and evaluation summaries
    curve.py        the training curve PNG drawn from metrics.jsonl
    hparams.py      train_config.json flattened, as trackers and the run's page show it
"""
