# shellcheck shell=bash disable=SC2034  # ZT_CARRY_*FLAGS are read by the script that sources this one
# tests/gpu/env.sh CARRY — sourced by tests/gpu/check.sh (and by its local dry run):
# the paths of the dependencies tests/gpu/carry.sh packed, unpacked under CARRY.
# They keep the Debian layout (CARRY/usr/..., CARRY/lib/...), so Open MPI finds its
# components, help texts and launcher again under OPAL_PREFIX, and PMIx its own.
# Sets ZT_CARRY_CPPFLAGS and ZT_CARRY_LDFLAGS for the build, and ZT_CARRY_CUDNN_FE (the
# cudnn-frontend headers, the Makefile's CUDNN_FE_INCLUDE).
C=${1:?"env.sh needs the carry's root"}
M=x86_64-linux-gnu
export PATH="$C/usr/bin:$PATH"
export OPAL_PREFIX="$C/usr"
export OPAL_SYSCONFDIR="$C/etc/openmpi"
export PMIX_INSTALL_PREFIX="$C/usr/lib/$M/pmix2"
export PMIX_MCA_mca_base_component_path="$C/usr/lib/$M/pmix2/lib/pmix"
zt_carry_libs="$C/usr/lib/$M:$C/lib/$M:$C/usr/lib/$M/openmpi/lib:$C/usr/lib/$M/pmix2/lib"
export LD_LIBRARY_PATH="$zt_carry_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ZT_CARRY_CPPFLAGS="-I$C/usr/include -I$C/usr/lib/$M/openmpi/include -I$C/usr/lib/$M/openmpi/include/openmpi"
ZT_CARRY_LDFLAGS="-L$C/usr/lib/$M -L$C/lib/$M -L$C/usr/lib/$M/openmpi/lib -Wl,-rpath-link,$zt_carry_libs"
ZT_CARRY_CUDNN_FE="$C/usr/local/lib/ztrain/cudnn-frontend/include"
