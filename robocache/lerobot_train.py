"""``python -m robocache.lerobot_train``: the name ``python -m robocache.lerobot.train`` had before the package
was grouped by job (issue 45), kept so training commands written with it still run."""

if __name__ == "__main__":
    from robocache.lerobot.train import main
    main()
