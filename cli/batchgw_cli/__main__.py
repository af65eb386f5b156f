from batchgw_cli.main import run

run()
