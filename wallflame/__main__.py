from wallflame.cli import main

main()
