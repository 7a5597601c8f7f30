from dflash_ckpt.cli import main

main()
