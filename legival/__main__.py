from legival.cli import main

main()
