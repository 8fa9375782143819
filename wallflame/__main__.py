from wallflame.entry import main

main()
