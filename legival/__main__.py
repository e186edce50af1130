from legival.cli import app

app()
