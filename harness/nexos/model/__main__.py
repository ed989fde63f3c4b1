"""``python -m nexos.model ...`` runs the ``model`` command group."""

from nexos.model.cli import model

if __name__ == "__main__":
    model(prog_name="nexos model")
