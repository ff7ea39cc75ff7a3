; Inno Setup 6 script: the Windows installer of HyFlash Chat (x64).
;
; Build the app first, then the installer (paths relative to this file by default):
;   python packaging\build.py
;   iscc packaging\windows\hyflash_chat.iss
; Options (iscc /DName=value): AppVersion (default 0.1.0), BundleDir (the folder that
; build.py made, default ..\..\dist\hyflash-chat), OutputDir (default ..\..\dist\installer),
; SetupIcon (an .ico; build.py leaves one at build\pyinstaller\hyflash-chat.ico).
; Result: <OutputDir>\HyFlashChat-<AppVersion>-windows-x64-setup.exe
;
; Per-user install by default (no administrator rights needed; the dialog offers all users).
; Silent install: HyFlashChat-...-setup.exe /VERYSILENT /SUPPRESSMSGBOXES /CURRENTUSER
; Settings, chats and downloaded models live in the user's AppData and survive uninstalling.

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#ifndef BundleDir
  #define BundleDir "..\..\dist\hyflash-chat"
#endif
#ifndef OutputDir
  #define OutputDir "..\..\dist\installer"
#endif

#define AppName "HyFlash Chat"
#define AppExeName "hyflash-chat.exe"

[Setup]
AppId={{0A43EE47-1367-4E44-9226-070EA1C9B900}
AppName={#AppName}
AppVersion={#AppVersion}
AppVerName={#AppName} {#AppVersion}
AppPublisher=HyFlash Chat
DefaultDirName={autopf}\{#AppName}
DefaultGroupName={#AppName}
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
OutputDir={#OutputDir}
OutputBaseFilename=HyFlashChat-{#AppVersion}-windows-x64-setup
; The GGUF model is most of the size and barely compresses: normal LZMA2 keeps the build quick.
Compression=lzma2
SolidCompression=yes
WizardStyle=modern
UninstallDisplayIcon={app}\{#AppExeName}
UninstallDisplayName={#AppName}
CloseApplications=yes
#ifdef SetupIcon
SetupIconFile={#SetupIcon}
#endif

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[InstallDelete]
; A previous version's files that this one no longer ships must not linger in _internal.
Type: filesandordirs; Name: "{app}\_internal"

[Files]
Source: "{#BundleDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\{#AppName}"; Filename: "{app}\{#AppExeName}"
Name: "{autodesktop}\{#AppName}"; Filename: "{app}\{#AppExeName}"; Tasks: desktopicon

[Run]
Filename: "{app}\{#AppExeName}"; Description: "{cm:LaunchProgram,{#StringChange(AppName, '&', '&&')}}"; Flags: nowait postinstall skipifsilent
