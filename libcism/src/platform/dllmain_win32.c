/* dllmain_win32.c - the entry point of cism.dll; built into the shared
 * library only (a static library must not bring a DllMain into the app). */
#if defined(_WIN32)
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

#include "platform.h"

BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved);

BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved) {
    (void)instance;
    /* reserved is NULL for FreeLibrary; at process exit nothing needs undoing */
    if (reason == DLL_PROCESS_DETACH && reserved == NULL) cism__platform_unload();
    return TRUE;
}
#else
typedef int cism__dllmain_win32_unused;
#endif
