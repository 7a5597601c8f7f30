from dflash_ckpt.entry import main

main()
