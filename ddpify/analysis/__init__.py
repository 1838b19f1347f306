"""DDP facts that convert and lint share, defined once: what makes ranks wait for each other
(`sync.py`) and the names scripts give ranks (`ranks.py`). Where the two start from different
models (convert: the model an optimizer trains; lint: the models DDP wraps), the model test is a
parameter."""
