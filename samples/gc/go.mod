module wallflame.dev/samples/gc

go 1.19
