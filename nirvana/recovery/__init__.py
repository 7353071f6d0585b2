"""LoRA recovery: fine-tune a pruned model with peft and merge the adapters back.

config.py (RecoveryConfig), data.py (training text -> token windows), train.py (recover: the
loop and the merge), save.py (save_recovered: an atomic pruned-checkpoint folder).
"""
