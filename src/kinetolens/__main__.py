"""``python -m kinetolens``: the ``kinetolens`` command, where its script is not on PATH."""

if __name__ == "__main__":
    from kinetolens.cli.main import run

    run()
