"""``python -m ctrlrun``: the same command as the ``ctrlrun`` console script."""

from ctrlrun.cli.main import main

if __name__ == "__main__":
    main()
