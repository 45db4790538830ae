from mptrain.cli import app

app(prog_name="mptrain")
