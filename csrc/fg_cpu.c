/* CPU feature detection (cpuid + xgetbv on x86; on aarch64 the OS's feature bits: getauxval, sysctl,
 * IsProcessorFeaturePresent) and instruction-set names. */
#include <string.h>
#include "fg_simd.h"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#define FG_X86 1
#if defined(_MSC_VER)
#include <intrin.h>
static void cpuid(int leaf, int sub, unsigned r[4]) {
    int t[4];
    __cpuidex(t, leaf, sub);
    for (int i = 0; i < 4; i++) r[i] = (unsigned)t[i];
}
static unsigned long long xgetbv0(void) { return _xgetbv(0); }
#else
#include <cpuid.h>
static void cpuid(int leaf, int sub, unsigned r[4]) {
    r[0] = r[1] = r[2] = r[3] = 0;
    __get_cpuid_count((unsigned)leaf, (unsigned)sub, &r[0], &r[1], &r[2], &r[3]);
}
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif
#endif

#if (defined(__aarch64__) || defined(_M_ARM64)) && defined(__linux__)
#include <sys/auxv.h>
#ifndef AT_HWCAP2 /* older C libraries */
#define AT_HWCAP2 26
#endif
#elif (defined(__aarch64__) || defined(_M_ARM64)) && defined(__APPLE__)
#include <sys/sysctl.h>
#elif (defined(__aarch64__) || defined(_M_ARM64)) && defined(_WIN32)
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#ifndef PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE /* older SDKs */
#define PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE 43
#endif
#endif

static struct {
    int done;
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512vnni, neon, dotprod, i8mm, amd;
    char names[160];
} cpu;

static void detect(void) {
    if (cpu.done) return;
#if FG_X86
    unsigned r[4];
    cpuid(0, 0, r);
    unsigned max_leaf = r[0];
    cpu.amd = (r[1] == 0x68747541 && r[3] == 0x69746e65 && r[2] == 0x444d4163) || /* "AuthenticAMD" */
              (r[1] == 0x6f677948 && r[3] == 0x656e6975 && r[2] == 0x6e65476e);   /* "HygonGenuine" */
    cpuid(1, 0, r);
    int osxsave = (r[2] >> 27) & 1, avx = (r[2] >> 28) & 1;
    int fma = (r[2] >> 12) & 1, f16c = (r[2] >> 29) & 1;
    unsigned long long xcr0 = (osxsave && avx) ? xgetbv0() : 0;
    int ymm_ok = (xcr0 & 0x6) == 0x6;             /* SSE and AVX state enabled by the OS */
    int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (max_leaf >= 7) {
        cpuid(7, 0, r);
        cpu.avx2 = ymm_ok && ((r[1] >> 5) & 1);
        cpu.avx512f = zmm_ok && ((r[1] >> 16) & 1);
        cpu.avx512bw = zmm_ok && ((r[1] >> 30) & 1);
        cpu.avx512vl = zmm_ok && ((r[1] >> 31) & 1);
        cpu.avx512vnni = zmm_ok && ((r[2] >> 11) & 1);
    }
    cpu.fma = ymm_ok && fma;
    cpu.f16c = ymm_ok && f16c;
#elif defined(__aarch64__) || defined(_M_ARM64)
    cpu.neon = 1;
#if defined(__ARM_FEATURE_DOTPROD)
    cpu.dotprod = 1;
#elif defined(__linux__)
    cpu.dotprod = (getauxval(AT_HWCAP) & (1UL << 20)) != 0; /* HWCAP_ASIMDDP */
#elif defined(_WIN32)
    cpu.dotprod = IsProcessorFeaturePresent(PF_ARM_V82_DP_INSTRUCTIONS_AVAILABLE) != 0;
#elif defined(__APPLE__)
    cpu.dotprod = 1; /* every arm64 Mac has it (M1 on), and Apple's clang defines __ARM_FEATURE_DOTPROD for them */
#endif
#if defined(__ARM_FEATURE_MATMUL_INT8)
    cpu.i8mm = 1;
#elif defined(__linux__)
    cpu.i8mm = (getauxval(AT_HWCAP2) & (1UL << 13)) != 0; /* HWCAP2_I8MM */
#elif defined(_WIN32) && defined(PF_ARM_V82_I8MM_INSTRUCTIONS_AVAILABLE)
    cpu.i8mm = IsProcessorFeaturePresent(PF_ARM_V82_I8MM_INSTRUCTIONS_AVAILABLE) != 0;
#elif defined(_WIN32) && defined(PF_ARM_SVE_I8MM_INSTRUCTIONS_AVAILABLE) /* SVE's I8MM needs FEAT_I8MM */
    cpu.i8mm = IsProcessorFeaturePresent(PF_ARM_SVE_I8MM_INSTRUCTIONS_AVAILABLE) != 0;
#elif defined(__APPLE__)
    { /* M2 on */
        int v = 0;
        size_t len = sizeof v;
        cpu.i8mm = sysctlbyname("hw.optional.arm.FEAT_I8MM", &v, &len, NULL, 0) == 0 && v != 0;
    }
#endif /* else (a Windows SDK that names neither): off */
#endif
    char *p = cpu.names;
    const char *names[] = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "neon", "dotprod",
                           "i8mm"};
    int flags[] = {cpu.avx2, cpu.fma, cpu.f16c, cpu.avx512f, cpu.avx512bw, cpu.avx512vl, cpu.avx512vnni, cpu.neon,
                   cpu.dotprod, cpu.i8mm};
    for (int i = 0; i < (int)(sizeof(flags) / sizeof(flags[0])); i++) {
        if (!flags[i]) continue;
        size_t len = strlen(names[i]);
        if (p != cpu.names) *p++ = ' ';
        memcpy(p, names[i], len);
        p += len;
    }
    *p = 0;
    cpu.done = 1;
}

int fg_isa_compiled(int isa) {
    switch (isa) {
    case FG_ISA_SCALAR: return 1;
#if FG_HAVE_X86
    case FG_ISA_AVX2: case FG_ISA_AVX512: return 1;
#endif
#if FG_HAVE_NEON
    case FG_ISA_NEON: return 1;
#endif
    default: return 0;
    }
}

int fg_isa_available(int isa) {
    detect();
    if (!fg_isa_compiled(isa)) return 0;
    switch (isa) {
    case FG_ISA_SCALAR: return 1;
    case FG_ISA_AVX2: return cpu.avx2 && cpu.fma && cpu.f16c;
    case FG_ISA_AVX512: return cpu.avx2 && cpu.fma && cpu.f16c && cpu.avx512f && cpu.avx512bw && cpu.avx512vl;
    case FG_ISA_NEON: return cpu.neon;
    default: return 0;
    }
}

int fg_cpu_has_vnni(void) { detect(); return cpu.avx512vnni; }
int fg_cpu_is_amd(void) { detect(); return cpu.amd; }
int fg_cpu_has_dotprod(void) { detect(); return cpu.dotprod; }
/* i8mm kernels run above the dotprod ones (every i8mm CPU has dotprod): both, and a compiler that builds them. */
int fg_cpu_has_i8mm(void) { detect(); return FG_HAVE_I8MM && cpu.dotprod && cpu.i8mm; }

const char *fg_cpu_features(void) {
    detect();
    return cpu.names;
}

static const char *const isa_names[FG_ISA_COUNT] = {"scalar", "avx2", "avx512", "neon"};

const char *fg_isa_name(int isa) { return isa >= 0 && isa < FG_ISA_COUNT ? isa_names[isa] : "unknown"; }

int fg_isa_from_name(const char *name) {
    for (int i = 0; i < FG_ISA_COUNT; i++)
        if (strcmp(name, isa_names[i]) == 0) return i;
    return -1;
}
