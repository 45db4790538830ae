from mptrain.cli import main

main()
