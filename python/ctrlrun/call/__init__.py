"""A protected call: binding the arguments to an effect key, the fingerprint an approval is
bound to, the steps every call makes (reserve, run, record the outcome), and the sync and async
drivers that make them. ``protect.py`` is the decorator."""
