/// @file
/// roce-incast: the incast benchmark on the software switch (apps/switch/incast_cli.h).
#include "apps/switch/incast_cli.h"

int main(int argc, char** argv) { return roce::fabric::incast_cli(argc, argv); }
